"""The API's routers: one module per spec endpoint group, plus the web pages and offline docs."""
