//go:build !race

package envoyrls

const raceEnabled = false
