"""Stagedoor's job kinds (filled in by the Stagedoor issue)."""
