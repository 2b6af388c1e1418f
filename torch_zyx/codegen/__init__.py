"""Code generation: kernel AST → loop IR (``lower``) → device source (renderers)."""
