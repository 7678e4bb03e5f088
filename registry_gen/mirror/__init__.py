"""The mirror: upstream registries (uplinks) proxied into the static tree, with a supply-chain
policy at the gate. `config` (uplinks and durations) and `policy` (which upstream versions are
served) are pure; `record` is the mirrored data a package's registry-meta.json carries; `service`
is the orchestrator that fetches, decides, lands and rebuilds (docs/mirror.md)."""
