"""Reports over a study: DataFrames (frame), the Pareto front (pareto), plots, export and profiles."""
