"""A fetched body read into the content that is indexed: extraction, normalization,
boilerplate, generated pages."""
