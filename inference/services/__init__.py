"""Writes for the registry, deployments and nodes. Each one checks permissions and records an audit event."""
