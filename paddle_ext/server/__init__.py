"""The Jupyter server extension: REST API for jobs, options and quota."""
