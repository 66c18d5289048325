"""Layer 3: the trusted judgement of a candidate (judge, hack rules, timing, speed of light, tensor wire, feedback
text). Imports only contract/ and isolation/."""
