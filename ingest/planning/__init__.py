"""When each page is crawled again and by which crawler: recrawl plans, and the links
and sitemaps that add pages."""
