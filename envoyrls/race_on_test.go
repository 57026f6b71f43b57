//go:build race

package envoyrls

// raceEnabled: under the race detector sync.Pool drops items at random,
// so that pooled buffers are allocated anew now and then.
const raceEnabled = true
