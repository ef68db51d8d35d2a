//go:build !race

package schema

const raceDetector = false
