# The generated reference pages (docs/reference/*.md), included by the top-level Makefile.
# tests/unit/test_docs.py fails while the committed pages differ from what the code makes:
# run this after changing a CLI option, a route, a chart value, a setting or a variable.
.PHONY: docs-reference
docs-reference: $(VENV_STAMP)
	$(VPY) -m tools.docs.reference
