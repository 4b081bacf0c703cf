"""Hostile input: what a forged producer or a careless operator can send, through the real engine
(issue 34)."""
