// The bench's baseline: the same Worker with no limiter, for what the Workers' own request
// handling costs (CPU, bundle, start).
export default {
  async fetch() {
    return new Response("ok");
  },
};
