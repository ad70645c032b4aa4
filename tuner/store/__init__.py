"""The experiments database: SqlStore (sql) and its tables (schema), rows (rows) and JSON codec (codec)."""
