"""The test Kubernetes control plane (issue 3)."""
