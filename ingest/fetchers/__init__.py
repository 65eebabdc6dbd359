"""The clients pages are fetched with, and what each kind of fetcher can do
(``kinds``)."""
