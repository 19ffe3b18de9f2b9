// Force-included after SimGrid's smpi_helpers.h (which smpicxx force-includes first) when
// DISTOP_ENABLE_SMPI is on. smpi_helpers.h defines exit(x) as a function-like macro, which
// rewrites every member function named exit (CLI11's App::exit, with which distop's programs
// report a bad command line). Without it, a call to exit() ends the whole simulation rather than
// one rank: distop's programs return from main instead.
#undef exit
