"""The dead-letter panel for notebooks (ipywidgets): its filters, its HTML and its widgets."""
