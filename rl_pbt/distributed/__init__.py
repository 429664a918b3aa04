"""Populations larger than one machine, on Ray (optional: `pip install "rl_pbt[ray]"`)."""
