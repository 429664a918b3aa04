"""Populations larger than one machine, on Ray (optional: `pip install -e ".[ray]"`)."""
