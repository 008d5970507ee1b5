"""The panel for notebooks (ipywidgets): the dashboard (a tab per state, views in the URL) and its dead-letter tab."""
