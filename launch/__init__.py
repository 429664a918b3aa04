"""Entry points: train, enjoy, match, replay, report."""
