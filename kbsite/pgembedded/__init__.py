"""A Django database backend that starts (or joins) the embedded PostgreSQL."""
