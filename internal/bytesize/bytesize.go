// Package bytesize reads and prints the byte counts of nlx's settings
// (NLX_CONFIG_MEMORY, NLX_MAX_PLAN_BYTES) in the units workspace limits use.
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	shift  uint
}{{"Gi", 30}, {"Mi", 20}, {"Ki", 10}}

// Parse reads a byte count: digits with an optional Ki, Mi or Gi suffix
// (powers of 1024), as in "512Mi" or "2Gi".
func Parse(s string) (int64, error) {
	digits, shift := s, uint(0)
	for _, u := range units {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, shift = d, u.shift
			break
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if errors.Is(err, strconv.ErrRange) && strings.Trim(digits, "0123456789") == "" {
		n, err = math.MaxUint64, nil // digits, and too many of them
	}
	if err != nil || digits == "" || digits[0] == '+' {
		return 0, fmt.Errorf("%q is not a byte count (digits with an optional Ki, Mi or Gi suffix, e.g. 512Mi)", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is too large: a byte count is at most 2^63-1 (8 EiB)", s)
	}
	return int64(n) << shift, nil
}

// Format prints n in the largest unit that divides it ("2 GiB", "1536 KiB").
func Format(n int64) string {
	for _, u := range units {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %sB", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Human prints n for people, rounded to one decimal in the largest unit
// it reaches ("12.3 MiB", "512 B").
func Human(n int64) string {
	for _, u := range units {
		if n >= 1<<u.shift {
			return fmt.Sprintf("%.1f %sB", float64(n)/float64(int64(1)<<u.shift), u.suffix)
		}
	}
	return fmt.Sprintf("%d B", n)
}
