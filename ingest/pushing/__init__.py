"""Pushes to Crawlbase's Enterprise Crawler: queued, sent, and paid for once each."""
