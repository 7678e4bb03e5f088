"""The user service: the `/user` resource of the specification (part A), as a Bottle app.

Entry points: `user_api.app.create_user_app`, `user_api.store.open_user_store`, `user_api.cli.register`.
"""
