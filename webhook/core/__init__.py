"""The pure core: what the webhook decides, with no IO and no event loop.

Layers, each importing only those below it (an import-linter contract keeps them):
`admission` → `rules` | `annotation` → `engine` → `state` → `model`.
"""
