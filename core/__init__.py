"""The bottom layer: the error family, strict environment readers and the live publish helper.

Imports Django and Channels but no Lantau app, so every app may import it and it imports none of them.
"""
