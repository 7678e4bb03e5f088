"""npm hooks (issue 30): webhooks on a package, a @scope or an ~owner, delivered from the change
journal at least once, signed as npm signs them.

- `rules` (pure): what a hook watches and gets, the envelope, the signature, the backoff, the
  circuit breaker per endpoint, the address rule.
- `store`: the contract of the hook store (hooks, the outbox of deliveries, the journal cursor);
  implemented beside the accounts (user_api.store_hooks).
- `secrets`: hook secrets encrypted at rest; `net`: one attempt, on a checked address.
- `deliverer` (I/O, orchestrator): the background thread of `serve`/`api`.
"""
