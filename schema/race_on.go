//go:build race

package schema

// raceDetector: the race detector maps shadow memory for everything the
// program maps, which RLIMIT_DATA counts; see dataLimit.
const raceDetector = true
