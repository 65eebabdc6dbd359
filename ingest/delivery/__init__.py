"""The webhook and the delivery job: each delivered page claimed once and applied to
the index."""
