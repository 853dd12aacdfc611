package analyze

// Redis compares command names and options in ASCII case (strcasecmp).
// strings.ToLower and ToUpper also map 'İ' to 'i', 'ı' to 'I', 'ſ' to 'S'
// and the Kelvin sign to 'k': the model took "pexpİre" for PEXPIRE, which
// Redis does not know (TestCommandNamesInASCIICase).

// lowerASCII is s with A-Z in lower case, every other byte as it is.
func lowerASCII(s string) string { return mapASCII(s, 'A', 'Z', 'a'-'A') }

// upperASCII is s with a-z in upper case, every other byte as it is.
func upperASCII(s string) string { return mapASCII(s, 'a', 'z', 'A'-'a') }

func mapASCII(s string, lo, hi byte, d int) string {
	for i := 0; i < len(s); i++ {
		if lo <= s[i] && s[i] <= hi {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if lo <= b[j] && b[j] <= hi {
					b[j] = byte(int(b[j]) + d)
				}
			}
			return string(b)
		}
	}
	return s
}
