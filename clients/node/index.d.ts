// Type declarations for sbqueue's Node client (index.js).
import { EventEmitter } from 'node:events';
import { ClientConfig, QueryResult } from 'pg';

export const MESSAGE_FIELDS: Record<string, string>;

export class Message {
    sequenceNumber: bigint;
    messageId: string;
    lockToken: string | null;
    lockedUntil: Date | null;
    deliveryCount: number;
    enqueuedTime: Date;
    scheduledEnqueueTime: Date | null;
    expiresAt: Date | null;
    /** seconds */
    timeToLive: number | null;
    state: 'active' | 'deferred' | 'scheduled';
    sessionId: string | null;
    correlationId: string | null;
    subject: string | null;
    contentType: string | null;
    replyTo: string | null;
    replyToSessionId: string | null;
    toAddress: string | null;
    applicationProperties: Record<string, unknown> | null;
    body: Buffer;
    deadLetterReason: string | null;
    deadLetterErrorDescription: string | null;
    deadLetterSource: string | null;
    bodyText(encoding?: BufferEncoding): string;
    bodyJson(): unknown;
}

export type Token = Message | string;
export type Body = string | Buffer | Uint8Array | unknown;

export interface SendOptions {
    messageId?: string;
    sessionId?: string;
    correlationId?: string;
    subject?: string;
    contentType?: string;
    replyTo?: string;
    replyToSessionId?: string;
    toAddress?: string;
    /** seconds, or an interval literal */
    timeToLive?: number | string;
    scheduledEnqueueTime?: Date | string;
    applicationProperties?: Record<string, unknown>;
}

/** a message with properties of its own, for sendMessages */
export interface OutgoingMessage extends SendOptions {
    body: Body;
}

export type Disposition = 'complete' | 'abandon' | 'defer' | 'deadletter' | 'renew';
export type Outcome = 'completed' | 'abandoned' | 'deferred' | 'dead_lettered' | 'expired' | 'renewed' | 'lock_lost';

export interface Settled {
    lockToken: string;
    outcome: Outcome;
    /** a renewed lock's new expiry */
    lockedUntil: Date | null;
}

export interface ReceiveOptions {
    maxMessages?: number;
    /** seconds */
    maxWait?: number;
    signal?: AbortSignal | null;
}

export interface AcceptSessionOptions {
    sessionId?: string | null;
    /** seconds */
    maxWait?: number;
    signal?: AbortSignal | null;
}

/** '<topic>/subscriptions/<subscription>': where a subscription is received from (and processed) */
export function subscriptionAddress(topic: string, subscription: string): string;

/** an interval: seconds, or an interval literal ('10 minutes') */
export type Interval = number | string;

/**
 * The options of createTopic and updateTopic: sbqueue's names, in camelCase or
 * snake_case (default_message_ttl, ...).
 */
export interface TopicOptions {
    defaultMessageTtl?: Interval | null;
    duplicateDetectionWindow?: Interval | null;
    maxMessageSize?: number | null;
    [option: string]: unknown;
}

/**
 * The options of createSubscription and updateSubscription: createQueue's but
 * maxMessageSize and duplicateDetectionWindow (the topic's apply), camelCase or
 * snake_case. forwardTo '' stops forwarding; requiresSession is set at creation only.
 */
export interface SubscriptionOptions {
    lockDuration?: Interval | null;
    maxDeliveryCount?: number | null;
    defaultMessageTtl?: Interval | null;
    deadLetteringOnMessageExpiration?: boolean | null;
    requiresSession?: boolean | null;
    forwardTo?: string | null;
    deadLetteringOnFilterEvaluationExceptions?: boolean | null;
    deadLetterTtl?: Interval | null;
    retryDelay?: Interval | null;
    retryBackoff?: boolean | null;
    maxRetryDelay?: Interval | null;
    [option: string]: unknown;
}

/** sbq_topic_properties (intervals in seconds) */
export interface TopicProperties {
    topic: string;
    defaultMessageTtl: number | null;
    duplicateDetectionWindow: number | null;
    maxMessageSize: number;
    createdAt: Date;
    updatedAt: Date;
}

/** sbq_subscription_properties (intervals in seconds) */
export interface SubscriptionProperties {
    topic: string;
    subscription: string;
    lockDuration: number;
    maxDeliveryCount: number;
    defaultMessageTtl: number | null;
    deadLetteringOnMessageExpiration: boolean;
    /** always null: duplicate detection is the topic's */
    duplicateDetectionWindow: number | null;
    requiresSession: boolean;
    forwardTo: string | null;
    forwardDeadLetteredMessagesTo: string | null;
    deadLetteringOnFilterEvaluationExceptions: boolean;
    createdAt: Date;
    updatedAt: Date;
    deadLetterTtl: number | null;
    retryDelay: number | null;
    retryBackoff: boolean;
    maxRetryDelay: number | null;
}

/**
 * A correlation filter: every property given must be equal (strings case-sensitively,
 * numbers by value). The SQL's snake_case names (correlation_id, properties) work too.
 */
export interface CorrelationFilter {
    correlationId?: string;
    messageId?: string;
    to?: string;
    replyTo?: string;
    subject?: string;
    sessionId?: string;
    replyToSessionId?: string;
    contentType?: string;
    applicationProperties?: Record<string, unknown>;
    [property: string]: unknown;
}

export interface RuleOptions {
    /** a SQL filter (Service Bus's SQL-92 subset) */
    sqlFilter?: string | null;
    correlationFilter?: CorrelationFilter | null;
    /** SET and REMOVE statements */
    action?: string | null;
}

/** a row of sbq_rules */
export interface RuleProperties {
    topic: string;
    subscription: string;
    rule: string;
    filterType: 'sql' | 'correlation' | 'true';
    /** the SQL filter, the correlation filter (as addRule takes it), or '1=1' */
    filter: string | CorrelationFilter;
    action: string | null;
    createdAt: Date;
}

/** sbq_new_message after sbq_test_action: the properties it has (timeToLive in seconds) */
export interface TestedMessage extends OutgoingMessage {
    body: Buffer;
}

/** a row of sbq_topic_stats */
export interface TopicStats {
    topic: string;
    subscriptionCount: bigint;
    /** messages sent to the topic (duplicates not counted) */
    sent: bigint;
    /** messages no subscription took */
    dropped: bigint;
}

export class Client {
    constructor(config?: ClientConfig | string, options?: { schema?: string });
    static connect(config?: ClientConfig | string, options?: { schema?: string }): Promise<Client>;
    /** the connection failed: make a new Client */
    broken: boolean;
    close(): Promise<void>;
    query(sql: string, params?: unknown[]): Promise<QueryResult>;
    transaction<T>(fn: (client: Client) => Promise<T>): Promise<T>;
    /** options: sbq_create_queue's, in snake_case or camelCase (intervals: seconds or literals) */
    createQueue(name: string, options?: Record<string, unknown>): Promise<void>;
    deleteQueue(name: string): Promise<void>;
    queueStats(name: string): Promise<Record<string, unknown> | null>;
    sender(queue: string): Sender;
    receiver(queue: string, options?: { receiveMode?: 'peek_lock' | 'receive_and_delete' }): Receiver;
    deadLetterReceiver(queue: string): Receiver;
    acceptSession(queue: string, options?: AcceptSessionOptions): Promise<SessionReceiver | null>;

    createTopic(name: string, options?: TopicOptions): Promise<TopicProperties>;
    updateTopic(name: string, options?: TopicOptions): Promise<TopicProperties>;
    deleteTopic(name: string): Promise<void>;
    /** rejects with EntityNotFound when there is none */
    getTopic(name: string): Promise<TopicProperties>;
    topics(): Promise<TopicProperties[]>;
    topicStats(topic: string): Promise<TopicStats>;
    createSubscription(topic: string, name: string, options?: SubscriptionOptions): Promise<SubscriptionProperties>;
    updateSubscription(topic: string, name: string, options?: SubscriptionOptions): Promise<SubscriptionProperties>;
    deleteSubscription(topic: string, name: string): Promise<void>;
    getSubscription(topic: string, name: string): Promise<SubscriptionProperties>;
    subscriptions(topic: string): Promise<SubscriptionProperties[]>;
    /** one filter at most (neither: the true filter) */
    addRule(topic: string, subscription: string, rule: string, options?: RuleOptions): Promise<void>;
    removeRule(topic: string, subscription: string, rule: string): Promise<void>;
    rules(topic: string, subscription: string): Promise<RuleProperties[]>;
    /** a SQL filter's value on a message: null when unknown; InvalidArgument when it fails to evaluate */
    testFilter(sqlFilter: string, body?: Body, options?: SendOptions): Promise<boolean | null>;
    /** the message after a rule's action (as sendMessages takes one) */
    testAction(action: string, body?: Body, options?: SendOptions): Promise<TestedMessage>;
    /** sender(topic) */
    topicSender(topic: string): Sender;
    subscriptionReceiver(topic: string, subscription: string, options?: { receiveMode?: 'peek_lock' | 'receive_and_delete' }): Receiver;
    subscriptionDeadLetterReceiver(topic: string, subscription: string): Receiver;
    acceptSubscriptionSession(topic: string, subscription: string, options?: AcceptSessionOptions): Promise<SessionReceiver | null>;
}

export class Sender {
    readonly queue: string;
    send(body: Body, options?: SendOptions): Promise<bigint>;
    sendBatch(bodies: Body[], options?: SendOptions): Promise<bigint[]>;
    sendMessages(messages: OutgoingMessage[]): Promise<bigint[]>;
    schedule(body: Body, when: Date, options?: SendOptions): Promise<bigint>;
    cancelScheduled(sequenceNumber: bigint | number | string): Promise<void>;
}

export class Receiver {
    readonly queue: string;
    receive(options?: ReceiveOptions): Promise<Message[]>;
    messages(options?: { maxWait?: number; batchSize?: number; signal?: AbortSignal | null }): AsyncGenerator<Message>;
    peek(options?: { maxMessages?: number; fromSequenceNumber?: bigint | number | null }): Promise<Message[]>;
    receiveDeferred(sequenceNumbers: Array<bigint | number | string>): Promise<Message[]>;
    complete(messages: Token | Token[]): Promise<number>;
    /** delay: seconds before the messages may be received again */
    abandon(messages: Token | Token[], propertiesToModify?: Record<string, unknown> | null, options?: { delay?: number | null }): Promise<void>;
    defer(messages: Token | Token[], propertiesToModify?: Record<string, unknown> | null): Promise<void>;
    deadLetter(messages: Token | Token[], options?: { reason?: string | null; errorDescription?: string | null; propertiesToModify?: Record<string, unknown> | null }): Promise<void>;
    /** for many, the earliest new expiry */
    renew(messages: Token | Token[]): Promise<Date>;
    settle(messages: Token | Token[], disposition: Disposition, options?: { reason?: string | null; errorDescription?: string | null; propertiesToModify?: Record<string, unknown> | null; delay?: number | null }): Promise<Settled[]>;
}

export class SessionReceiver extends Receiver {
    readonly sessionId: string;
    readonly token: string;
    lockedUntil: Date;
    renewSession(): Promise<Date>;
    getState(): Promise<Buffer | null>;
    setState(state: Buffer | Uint8Array | null): Promise<void>;
    release(): Promise<void>;
}

export class DeadLetter extends Error {
    constructor(reason?: string | null, description?: string | null);
    reason: string | null;
    description: string | null;
}

export type HandlerResult = void | undefined | null | true | 'complete' | 'abandon' | 'defer' | 'deadletter';

export class Processor extends EventEmitter {
    /** queue: a queue's name or a subscription's address (subscriptionAddress) */
    constructor(config: ClientConfig | string, queue: string,
                handler: (message: Message) => HandlerResult | Promise<HandlerResult>,
                options?: { concurrency?: number; maxWait?: number; renewLocks?: boolean; schema?: string });
    settled: { complete: number; abandon: number; defer: number; deadletter: number; lost: number; failed: number };
    renewals: number;
    start(): Promise<this>;
    stop(): Promise<void>;
    run(): Promise<void>;
}

export class SbqError extends Error {
    sqlstate: string;
    detail?: string;
    hint?: string;
}
export class QueueNotFound extends SbqError {}
export class MessageLockLost extends SbqError {}
export class MessageNotFound extends SbqError {}
export class SessionLockLost extends SbqError {}
export class SessionCannotBeLocked extends SbqError {}
export class QueueAlreadyExists extends SbqError {}
export class MessageTooLarge extends SbqError {}
export class EntityNotFound extends SbqError {}
export class InvalidOperation extends SbqError {}
export class InvalidArgument extends SbqError {}
export class NullArgument extends SbqError {}
export class PermissionDenied extends SbqError {}
export class OutOfLocks extends SbqError {}
export class ReadOnly extends SbqError {}
export class QuotaExceeded extends SbqError {}
export class NotSupported extends SbqError {}
export function translate(err: unknown): unknown;
