//! The Cloudflare Worker: a deployable edge rate limiter built on `edgelimit`.
