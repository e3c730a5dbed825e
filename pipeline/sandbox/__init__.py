"""The owner's training code: its folder, and the sandbox it runs in (docs/sandbox.md)."""
