// System-library shim over Debian's liblz4-dev (lz4.h). Nothing is compiled here.
#include <lz4.h>
