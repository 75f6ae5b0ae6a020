// Everything is inline in include/CAtomics.h; SwiftPM needs one source file.
#include "CAtomics.h"
