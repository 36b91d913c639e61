"""An agent package for agentops: a parcel-notice agent and its two tools.

Installed next to agentops, it is found through its entry point (pyproject.toml) and imported
once at start-up; it imports nothing of agentops but `agentops.sdk`.
"""
