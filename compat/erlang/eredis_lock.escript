#!/usr/bin/env escript
%% eredis (Debian's erlang-redis-client, eredis 1.2.0) through lockproxy:
%% the handshake its start_link options send (SELECT of the database, AUTH
%% of a password), then the lock flow Erlang code writes with it: eredis:q
%% for one command, eredis:qp for a pipeline, and concurrent callers of one
%% client, whose commands share its connection in order.
%%
%% Run by compat/langs_test.go, against one plain redis-server and through
%% lockproxy:
%%
%%     escript eredis_lock.escript PORT PREFIX
%%
%% Each "STEP name result" line is compared with the plain run's; at each
%% "CHECK ..." line the test reads the masters and answers "ok"
%% (runDriven). An assertion that fails exits 1 with the reason on stderr.

-define(EXTEND, <<"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end">>).
-define(RELEASE, <<"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end">>).

main([PortS, Prefix]) ->
    code:add_pathsa(filelib:wildcard("/usr/lib/erlang/lib/redis_client-*/ebin")),
    Port = list_to_integer(PortS),
    {ok, Vsn} = application:get_key(load_app(), vsn),
    io:format("eredis ~s~n", [Vsn]),
    Key = list_to_binary(Prefix ++ "lock"),
    Tok = <<"erl-token-a">>,
    Other = <<"erl-token-b">>,

    %% Handshakes: start_link with a database (SELECT on connect), with a
    %% password where none is set (its AUTH fails the start), then probes.
    {ok, C} = eredis:start_link("127.0.0.1", Port, 0, "", no_reconnect),
    step("ping", eredis:q(C, ["PING"])),
    step("start_link password, no requirepass",
         case catch start_quiet(Port, "secret") of
             {ok, _} -> started;
             Err -> {not_started, first_word(Err)}
         end),
    step("select 0", eredis:q(C, ["SELECT", "0"])),
    step("client setname", eredis:q(C, ["CLIENT", "SETNAME", "erl-named"])),
    step("client getname", eredis:q(C, ["CLIENT", "GETNAME"])),
    {ok, Info} = eredis:q(C, ["INFO", "server"]),
    step("info server has redis_version", binary:match(Info, <<"redis_version:">>) =/= nomatch),
    step("echo", eredis:q(C, ["ECHO", "hi"])),
    {ok, C2} = eredis:start_link("127.0.0.1", Port),

    %% The lock flow.
    expect(step("set nx px", eredis:q(C, ["SET", Key, Tok, "NX", "PX", 5000])) =:= {ok, <<"OK">>},
           "SET NX PX refused a free lock"),
    check(["held", Key, Tok]),
    expect(step("contender set nx px", eredis:q(C2, ["SET", Key, Other, "NX", "PX", 5000])) =:= {ok, undefined},
           "a contender got a held lock"),
    %% Five processes contend through one client at once.
    Self = self(),
    [spawn(fun() -> Self ! {contender, I, eredis:q(C2, ["SET", Key, Other, "NX", "PX", 5000])} end)
     || I <- lists:seq(1, 5)],
    step("5 concurrent contenders", lists:sort([receive {contender, I, R} -> R end || I <- lists:seq(1, 5)])),
    step("get", eredis:q(C, ["GET", Key])),
    step("exists", eredis:q(C, ["EXISTS", Key])),
    {ok, T} = eredis:q(C, ["PTTL", Key]),
    step("pttl in 1000..5000", in(T, 1000, 5000)),
    expect(step("eval extend", eredis:q(C, ["EVAL", ?EXTEND, 1, Key, Tok, 8000])) =:= {ok, <<"1">>}, "extend failed"),
    check(["pttl", Key, "6000", "8000"]),
    step("stranger's extend", eredis:q(C2, ["EVAL", ?EXTEND, 1, Key, Other, 9000])),
    step("stranger's release", eredis:q(C2, ["EVAL", ?RELEASE, 1, Key, Other])),
    check(["held", Key, Tok]),
    {ok, Sha} = step("script load", eredis:q(C, ["SCRIPT", "LOAD", ?RELEASE])),
    step("script exists", eredis:q(C, ["SCRIPT", "EXISTS", Sha, binary:copy(<<"0">>, 40)])),
    step("evalsha of an unknown sha1", eredis:q(C, ["EVALSHA", binary:copy(<<"0">>, 40), 1, Key, Tok])),
    step("stranger's evalsha release", eredis:q(C2, ["EVALSHA", Sha, 1, Key, Other])),
    check(["held", Key, Tok]),

    %% A pipeline: one write, the replies in a list.
    [{ok, G}, {ok, P}, {ok, X}, {ok, S}] =
        eredis:qp(C, [["GET", Key], ["PTTL", Key], ["EXISTS", Key], ["SET", Key, Other, "NX", "PX", 5000]]),
    step("pipeline get, pttl, exists, set nx px", [G, in(P, 1000, 8000), X, S]),

    %% A check-and-set release: WATCH, GET, then MULTI, DEL, EXEC.
    step("watch", eredis:q(C, ["WATCH", Key])),
    expect(step("get", eredis:q(C, ["GET", Key])) =:= {ok, Tok}, "the holder read another value"),
    step("multi, del, exec", eredis:qp(C, [["MULTI"], ["DEL", Key], ["EXEC"]])),
    check(["gone", Key]),

    expect(step("set ex nx", eredis:q(C2, ["SET", Key, Other, "EX", 5, "NX"])) =:= {ok, <<"OK">>}, "re-acquire failed"),
    check(["held", Key, Other]),
    step("evalsha release", eredis:q(C2, ["EVALSHA", Sha, 1, Key, Other])),
    check(["gone", Key]),
    step("release again", eredis:q(C2, ["EVALSHA", Sha, 1, Key, Other])),
    eredis:stop(C),
    eredis:stop(C2);
main(_) ->
    fail("usage: escript eredis_lock.escript PORT PREFIX").

load_app() ->
    case application:load(eredis) of
        ok -> eredis;
        Err -> fail(io_lib:format("eredis is missing (~p): apt-get install -y erlang-redis-client", [Err]))
    end.

%% start_quiet starts a client outside this process's links: a refused
%% start makes start_link's process exit, which would end the script.
start_quiet(Port, Password) ->
    %% The refused client's crash report is expected: not on stderr.
    logger:set_primary_config(level, none),
    process_flag(trap_exit, true),
    R = eredis:start_link("127.0.0.1", Port, 0, Password, no_reconnect),
    receive {'EXIT', _, _} -> ok after 100 -> ok end,
    process_flag(trap_exit, false),
    logger:set_primary_config(level, notice),
    R.

%% first_word keeps the error code of a server error (both servers' texts
%% differ in detail).
first_word({error, Msg}) when is_binary(Msg) ->
    hd(binary:split(Msg, <<" ">>));
first_word({error, Other}) -> first_word(Other);
first_word({authentication_error, {unexpected_data, {ok, Msg}}}) -> {authentication_error, first_word({error, Msg})};
first_word(Other) -> Other.

in(Bin, Lo, Hi) ->
    N = binary_to_integer(Bin),
    N >= Lo andalso N =< Hi.

step(Name, R) ->
    %% ~p on one line: the test compares lines.
    Text = re:replace(io_lib:format("~p", [show(R)]), "\\s*\n\\s*", "", [global, {return, list}]),
    io:format("STEP ~s ~s~n", [Name, Text]),
    R.

show({error, Msg}) when is_binary(Msg) -> {error, first_word({error, Msg})};
show(L) when is_list(L) -> [show(E) || E <- L];
show(R) -> R.

check(Args) ->
    io:format("CHECK ~s~n", [lists:join(" ", [to_list(A) || A <- Args])]),
    case io:get_line("") of
        "ok\n" -> ok;
        Answer -> fail(io_lib:format("checkpoint ~p: test answered ~p", [Args, Answer]))
    end.

to_list(B) when is_binary(B) -> binary_to_list(B);
to_list(L) -> L.

expect(true, _) -> ok;
expect(false, Msg) -> fail(Msg).

fail(Msg) ->
    io:format(standard_error, "FAIL: ~s~n", [Msg]),
    halt(1).
