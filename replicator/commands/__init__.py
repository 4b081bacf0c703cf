"""The ``replicator`` commands (cli.py is the entry point): each one drives the stages or reads what they
recorded (mirror, bootstrap, replay, status, dead-letters, optimize, decode)."""
