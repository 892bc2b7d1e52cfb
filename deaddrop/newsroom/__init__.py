"""The newsroom's domain: sources, their submissions and replies, journalists and their desk."""
