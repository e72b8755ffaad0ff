"""Management API routers for the registry, deployments and nodes."""
