"""The correctness gate: prompts (settings), pure verdicts (checks, garbage), the HTTP run (run)."""
