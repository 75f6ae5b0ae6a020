// System-library shim over Debian's libxxhash-dev (xxhash.h). Cairn uses XXH3-64 only.
#include <xxhash.h>
