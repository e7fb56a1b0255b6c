/**
 * Any undici dispatch function, of undici 7 or undici 8: `(options, handler) => boolean`.
 * The parameters are `never` so that both versions' option and handler types fit.
 */
export type AnyDispatch = (options: never, handler: never) => boolean;

/**
 * An interceptor for `dispatcher.compose(...)` that hands back a dispatch function of the type
 * it was given. undici 7 and undici 8 declare different handler types (`onBodySent` changed
 * shape, the callback methods are gone in 8), so an interceptor typed against one version's
 * `DispatcherComposeInterceptor` does not compile against the other's; this generic one fits
 * the `compose` of either version's `Agent`, `Pool` and `Client` without a cast.
 */
export type DispatchInterceptor = <D extends AnyDispatch>(dispatch: D) => D;

/** Any undici dispatcher (`Agent`, `Pool`, `Client`, or one from `compose`) of undici 7 or 8. */
export interface AnyDispatcher {
  dispatch: AnyDispatch;
}
