"""The IO shell: moves data between the world and the core, and decides nothing itself.

Layers: `cli` → `https` | `cluster` → `process`.
"""
