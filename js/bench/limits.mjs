// The bench's limits, written once for both Workers: { name, algorithm, limit, window (seconds),
// refill (token bucket), header (whose value identifies) }. Each Worker turns them into its
// library's configuration: the same algorithm and numbers.

/** edgelimit's policy spec for a limit. */
export function edgelimitPolicy(l) {
  switch (l.algorithm) {
    case "fixed":
      return `fixed ${l.limit}/${l.window}s`;
    case "sliding":
      return `sliding-counter ${l.limit}/${l.window}s`;
    case "token-bucket":
      return `token-bucket ${l.refill}/${l.window}s burst ${l.limit}`;
    default:
      throw new Error(`unknown algorithm ${l.algorithm}`);
  }
}
