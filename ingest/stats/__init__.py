"""How crawling and ingest are going: the counts, and the dashboard that shows them."""
