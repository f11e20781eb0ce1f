"""CLI commands (placeholder until its issue lands)."""
