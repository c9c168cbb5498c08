// tests come later
