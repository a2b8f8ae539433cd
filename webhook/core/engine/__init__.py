"""The precedence engine (SPEC §4, §5): who attaches where, contexts through the hierarchy, one
board per context, and the memo of work shared while the state holds."""
