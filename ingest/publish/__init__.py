"""A docs site's publish hook: checks for changes, run for the site's publish tokens."""
