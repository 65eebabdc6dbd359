# Ingest keeps no tables of its own: deliveries and pages live in ``sources``,
# chunks and vectors in ``retrieval``.
