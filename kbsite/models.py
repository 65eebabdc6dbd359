"""No models of its own: this module makes Django send ``post_migrate`` for the
site app, which creates the cache table then (see ``apps.py``)."""
