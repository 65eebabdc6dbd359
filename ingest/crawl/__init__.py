"""The built-in crawler: a frontier in the database, polite fetching, and pages
delivered through the same ingest path as Crawlbase's."""
