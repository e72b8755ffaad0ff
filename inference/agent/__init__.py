"""The node agent: one per machine. Heartbeats to the console and runs the replicas placed on this node.

It imports no Django, so a GPU host needs only the runner's slim dependencies plus httpx.
"""
