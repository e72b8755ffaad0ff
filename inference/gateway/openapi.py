"""The `/v1/` OpenAPI document now lives with the data plane (``inference.edge.openapi``); kept here for
the names the console and its tests import."""

from inference.edge.openapi import OPENAPI_PATH, OPENAPI_V1

__all__ = ["OPENAPI_PATH", "OPENAPI_V1"]
