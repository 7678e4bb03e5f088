// Test-only stand-in for ONE answer of the Sigstore TUF repository, which these machines cannot
// reach. Loaded into npm with NODE_OPTIONS="--require <this file>".
//
// `npm audit signatures` first asks the TUF repository for `<registry host>/keys.json`; the real
// repository answers "target not found" (a TUFError with code TUF_FIND_TARGET_ERROR, from
// @sigstore/tuf's getTarget) for every registry but the public one, and npm then fetches
// `/-/npm/v1/keys` from the registry itself. This preload makes npm's own copy of @sigstore/tuf
// give that answer without the network; npm's key fetch and signature checks run unchanged.
'use strict'
const fs = require('fs')
const path = require('path')

function npmTuf () {
  const main = process.argv[1]
  if (!main) return null
  try {
    const from = path.dirname(fs.realpathSync(main))
    return require(require.resolve('@sigstore/tuf', { paths: [from] }))
  } catch {
    return null // not npm (an install script, say): nothing to stand in for
  }
}

const tuf = npmTuf()
if (tuf && typeof tuf.initTUF === 'function') {
  const notFound = (target) => new tuf.TUFError({ code: 'TUF_FIND_TARGET_ERROR', message: `target ${target} not found` })
  tuf.initTUF = async () => ({
    getTarget: async (target) => { throw notFound(target) },
  })
}
