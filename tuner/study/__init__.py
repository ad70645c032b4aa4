"""The study: the Optuna ask/tell loop (runner), its storage (storage), re-measuring a trial (confirm)."""
